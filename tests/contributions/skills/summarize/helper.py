print("helper script")
