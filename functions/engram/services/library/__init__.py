"""The library: memories, review candidates, notes, messages, threads, reminders, skills."""
