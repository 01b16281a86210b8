"""The edges between aiortc and the sans-I/O core: aiortc's objects replaced or tuned, asyncio's timers.

Only `private.py` touches aiortc's private parts, and it checks them all when this package is imported.
"""
