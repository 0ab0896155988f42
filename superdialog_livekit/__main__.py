"""``python -m superdialog_livekit`` runs the CLI."""

from superdialog_livekit.cli import main

raise SystemExit(main())
