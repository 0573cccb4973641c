"""Built-in hal backend plugins (installed as ``hal_backends``), one module per vendor."""
