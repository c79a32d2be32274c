"""Control: the kopf registrations, the status observer and everything that writes for one SGLangServer (apply,
drain, ledger, multi-node late apply). Imports process, io, decisions, builders, api, sglang; nothing imports it but
the entry points."""
