"""Recall: memories for a turn, past conversations, the boot package."""
