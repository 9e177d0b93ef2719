from tests.helpers.gcs import fake_gcs  # noqa: F401 - the fixture
