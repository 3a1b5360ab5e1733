"""The app's state that needs no Qt: chat history, settings, the data folder's files and the
window's remembered frame. A test checks that nothing here imports Qt."""
