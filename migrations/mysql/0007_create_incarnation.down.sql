DROP TABLE IF EXISTS leadership_incarnation
