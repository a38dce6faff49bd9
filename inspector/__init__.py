"""The live inspector page (`/inspect/<conversation>`) and the staff console's reads."""
