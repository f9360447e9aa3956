"""PostgreSQL access: the schema, migrations and the order store."""
