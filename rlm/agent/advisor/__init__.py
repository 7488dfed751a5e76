"""The advisor: a second model that watches the agent and may advise it (issue 29).
rlm.agent.advisor.guard is the pure half (emission guard, feed rendering), .watch the
thread that calls the advisor's model; rlm.app.advising wires it into an agent."""

from rlm.agent.advisor.guard import RECORDED, SEVERITIES, EmissionGuard, advisory_text
from rlm.agent.advisor.watch import (
    STATS_ENTRY,
    Advice,
    Advisor,
    AdvisorStats,
    latest_report,
    report_line,
)

__all__ = ["RECORDED", "SEVERITIES", "STATS_ENTRY", "Advice", "Advisor", "AdvisorStats",
           "EmissionGuard", "advisory_text", "latest_report", "report_line"]
