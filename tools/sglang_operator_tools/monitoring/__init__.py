"""The operator's series the rules and the dashboard query (:mod:`.series`), the alert rules (:mod:`.rules`) and
the dashboard (:mod:`.dashboard`), generated into ``deploy/`` and the chart (:mod:`.generate`)."""
