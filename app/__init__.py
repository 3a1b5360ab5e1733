"""Elastic Chat's desktop app (PySide6). Until the GUI lands, `main` runs a terminal chat."""
