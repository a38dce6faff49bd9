"""What extensions do to conversations (spec 04): send, attention, run participation, tool
calls, interactions, ambient surfaces, and the live event stream (spec 01, live updates).

The capabilities are attached to every hook context by `apps.SurfacesConfig.ready()` through
the runtime's `register_capability`; the rules live in `services/`.
"""
