DROP TABLE IF EXISTS leadership_guard
