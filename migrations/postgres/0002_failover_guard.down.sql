DROP TABLE IF EXISTS leadership_guard;
DROP TABLE IF EXISTS leadership_incarnation;
