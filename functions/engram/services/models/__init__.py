"""The models Engram calls itself: every prompt, and reading what a model answered."""
