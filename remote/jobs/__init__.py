"""Jobs: the supervisor protocol, the runner that starts, restarts and kills, the watch stream."""
