DELETE FROM leadership_guard WHERE id = 1
