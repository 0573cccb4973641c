"""Built-in hal backend plugins (installed as ``hal_backends``): one folder per vendor holding its plugin,
its fused-kernel adapters and its facts (docs/plugins.md, "Where a vendor's facts live")."""
