from kbroker.cli import main

raise SystemExit(main())
