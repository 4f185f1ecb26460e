"""The `kernelab ceilings` command(s): not built yet."""


def register(app) -> None:  # filled in by the issue that builds this command
    pass
