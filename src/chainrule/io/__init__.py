"""Files written whole: a sealed file format (a checksum over its bytes),
atomic replacement, and Ctrl-C held off while a file is written.

The bottom layer beside ``value``: it imports the standard library only.
The checkpoints built on it (:mod:`chainrule.checkpoint`,
:mod:`chainrule.tensor.checkpoint`) live with the models they save.
"""
