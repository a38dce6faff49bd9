"""Services of extension contributions, one module per concern (see the package docstring)."""
