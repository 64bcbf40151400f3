"""Host side of load balancing: receiver reorder buffer (reorder.py), PLB repathing (plb.py), ECMP collision math (ecmp_math.py)."""
