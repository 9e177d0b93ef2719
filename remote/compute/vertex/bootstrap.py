"""The program a submitted job's workers run first (``python3 -c SOURCE URL COMMAND``): fetch the
packaged tree from Cloud Storage, unpack it into ./project, and run the job's command there.

Shipped as source text in the job's ``containerSpec.args`` (read with ``inspect``-free
``Path.read_text``), so it must stay standalone: the standard library and google-cloud-storage
(in Google's prebuilt training images) only. ``STORAGE_EMULATOR_HOST`` set: anonymous, as the
emulator's fake-gcs wants. Members that would land outside ./project are refused.
"""

import os
import sys
import tarfile


def main() -> None:
    url, command = sys.argv[1], sys.argv[2]
    from google.cloud import storage  # type: ignore[attr-defined]

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        client = storage.Client(credentials=AnonymousCredentials(), project="emulated")
    else:
        client = storage.Client()
    bucket, _, key = url[len("gs://") :].partition("/")
    client.bucket(bucket).blob(key).download_to_filename("code.tar.gz")
    root = os.path.realpath("project")
    with tarfile.open("code.tar.gz") as archive:
        for member in archive.getmembers():
            where = os.path.realpath(os.path.join(root, member.name))
            if not (member.isfile() or member.isdir()) or not where.startswith(root + os.sep):
                raise SystemExit(f"gcptui bootstrap: refusing archive member {member.name!r}")
        archive.extractall(root)  # noqa: S202 - every member checked above
    os.remove("code.tar.gz")
    os.chdir(root)
    print(f"gcptui: unpacked {url} into {root}", flush=True)
    os.execvp("sh", ["sh", "-c", command])


if __name__ == "__main__":
    main()
