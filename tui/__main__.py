from gcptui.tui.cli.main import entry

entry()
