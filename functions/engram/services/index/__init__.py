"""The search index as the services see it: the guard, the vector gate, rebuilding it."""
