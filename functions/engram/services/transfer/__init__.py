"""Export and import of Engram's own format, and moving in from other systems."""
