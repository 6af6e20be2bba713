"""Storage: the SQLite store, its repair and salvage, recovery at start, the in-memory index, search."""
