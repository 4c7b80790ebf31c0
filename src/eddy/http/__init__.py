"""Eddy's HTTP listeners (aiohttp, the one HTTP framework): what they share."""
