"""Launching plans: per-stream scratch (scratch.py) and bound launchers (launcher.py).
The only package besides scangen.compile that imports pycuda, and only when called."""
