"""Widgets: layout and signals of user intent only; app state lives in the controller."""
