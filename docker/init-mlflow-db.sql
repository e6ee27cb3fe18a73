-- The MLflow tracking server's own database, beside the sweep database (POSTGRES_DB).
CREATE DATABASE mlflow OWNER actsweep;
