"""The `kernelab timeline` command: being built (see its issue)."""


def register(app) -> None:  # replaced by the engineer who builds this command
    pass
