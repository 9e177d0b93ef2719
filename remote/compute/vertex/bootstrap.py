"""The program a submitted job's workers run first (``python3 -c SOURCE URL COMMAND RESUME``): fetch
the packaged tree from Cloud Storage, unpack it into ./project, and run the job's command there.

Vertex restarts a preempted or crashed worker with the same command, in a fresh container: so the
first start of each task of a job leaves a marker object beside the package
(``.started/JOB_ID-RANK``), and a start that finds its marker runs ``RESUME`` instead (the trainer
then restores from the bucket, ``GCPTUI_CHECKPOINT_URL``).

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
    resume = sys.argv[3] if len(sys.argv) > 3 else command
    from google.cloud import storage  # type: ignore[attr-defined]

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        client = storage.Client(credentials=AnonymousCredentials(), project="emulated")
    else:
        client = storage.Client()
    bucket, _, key = url[len("gs://") :].partition("/")
    client.bucket(bucket).blob(key).download_to_filename("code.tar.gz")
    folder = key.rsplit("/", 1)[0] if "/" in key else ""
    marker = client.bucket(bucket).blob(f"{folder}/.started/{os.environ.get('CLOUD_ML_JOB_ID', 'job')}-"
                                        f"{os.environ.get('RANK', '0')}")  # fmt: skip
    restarted = marker.exists()
    if not restarted:
        marker.upload_from_string(b"")
    root = os.path.realpath("project")
    with tarfile.open("code.tar.gz") as archive:
        for member in archive.getmembers():
            where = os.path.realpath(os.path.join(root, member.name))
            if not (member.isfile() or member.isdir()) or not where.startswith(root + os.sep):
                raise SystemExit(f"gcptui bootstrap: refusing archive member {member.name!r}")
        archive.extractall(root)  # noqa: S202 - every member checked above
    os.remove("code.tar.gz")
    os.chdir(root)
    print(f"gcptui: unpacked {url} into {root}{'; restarted: resuming' if restarted else ''}", flush=True)
    os.execvp("sh", ["sh", "-c", resume if restarted else command])


if __name__ == "__main__":
    main()
