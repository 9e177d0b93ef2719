"""Keep-alive: preemption detection, recovery, relaunch, and the timeline of events."""
