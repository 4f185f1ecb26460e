"""One module per command (or small family of commands); each exposes register(app)."""
