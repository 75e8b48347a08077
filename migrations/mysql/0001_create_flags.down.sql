DROP TABLE IF EXISTS leadership_flags
