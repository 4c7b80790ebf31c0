from eddy.cli.main import app

app()
