"""The REST service (FastAPI): one router per resource, thin routes over service.control.submission."""
