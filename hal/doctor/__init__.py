"""hal doctor (in progress)."""
