"""The library: memories, review candidates, notes, messages, threads, reminders, skills, and the change
journal of them all (journal.py, journaled_store.py; docs/journal.md)."""
