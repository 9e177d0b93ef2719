"""The Google APIs the emulator serves, each with its discovery document and the prefix of its paths.

A new API (TPU ``tpu.v2.json``, Vertex AI ``aiplatform.v1.json``, Logging ``logging.v2.json``, GKE
``container.v1.json``) adds one line here when its room lands in ``remote/emulator/``; from then on
every exchange a test makes with it is checked. All of them share the emulator's one endpoint, so
their paths must not overlap (each Google API has its own first segments).
"""

from __future__ import annotations

import functools

from tests.schema.documents import Api

# (document file, the path prefix the emulator serves it under, legacy error list)
API_DOCUMENTS = (
    ("compute.v1.json", "/", True),  # servicePath compute/v1/
    ("oslogin.v1.json", "/", False),  # v1/users/...
    ("cloudbilling.v1.json", "/", False),  # v1/services/...
    ("tpu.v2.json", "/", False),  # v2/projects/P/locations/Z/nodes...
    ("aiplatform.v1.json", "/", False),  # v1/projects/P/locations/R/customJobs...
    ("logging.v2.json", "/", False),  # v2/entries:list
    ("container.v1.json", "/", False),  # v1/projects/P/locations/L/clusters...
    ("iam.v1.json", "/", False),  # v1/projects/P/serviceAccounts...
    ("cloudbuild.v1.json", "/", False),  # v1/projects/P[/locations/L]/builds...
    ("artifactregistry.v1.json", "/", False),  # v1/projects/P/locations/L/repositories...
)


@functools.cache
def apis() -> tuple[Api, ...]:
    """Every API's document, parsed once per process."""
    return tuple(Api(file, prefix, legacy) for file, prefix, legacy in API_DOCUMENTS)
