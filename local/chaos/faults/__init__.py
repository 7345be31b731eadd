"""The fault side of a chaos run: the driver that injects faults, and the processes it starts."""
