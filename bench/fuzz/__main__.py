import sys

from bench.fuzz.cli import main

sys.exit(main())
