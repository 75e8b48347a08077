-- The guard record takes the incarnation the schema is migrated under
-- (migration 0010), unless it has one already. COALESCE keeps '' when the
-- server restarted between the two migrations (the MEMORY table is empty
-- again): the first acquire statement then records the incarnation.
UPDATE leadership_guard SET incarnation = COALESCE(
    (SELECT i.incarnation FROM leadership_incarnation i WHERE i.server_id = @@server_id), incarnation)
WHERE id = 1 AND incarnation = ''
