"""The GKE backend: training workloads of ``[[gke]]`` clusters as fleet rows, their pods as workers."""
