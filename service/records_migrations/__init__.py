"""The sweep database's schema migrations (Alembic), applied by service.records on first use.

``versions/`` holds one revision per change of the schema, each naming the one before it
(``down_revision``); 0001 is the schema as it stood when migrations began. A change to the tables
in service/records.py goes with a new revision here: tests/service/test_records.py checks that the
migrated schema equals the tables the code declares, and that a database made before 0001 is upgraded.
"""
