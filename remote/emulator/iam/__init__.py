"""IAM (``iam.v1``): service accounts, as far as ``keeper deploy`` needs them."""
