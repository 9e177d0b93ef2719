"""The emulated machines themselves, shared by every API that has VMs: loopback addresses, an SSH
server per VM, the metadata server, processes, the persistent disk and a stand-in ``nvidia-smi``."""
