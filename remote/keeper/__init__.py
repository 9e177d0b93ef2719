"""The keeper: the headless keep-alive on a small VM in the project, holding the recovery lease."""
