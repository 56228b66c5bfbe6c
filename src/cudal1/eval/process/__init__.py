"""The untrusted side: what runs in a worker process and the channel to it.

A candidate worker imports this package and nothing else of cudal1 (no pool, no pydantic
configs): ``worker`` (the command loop), ``protocol`` (the commands and who may receive them),
``wire`` (the message format, no pickle), ``state`` (what a candidate must leave as it found it),
``threadwatch``. ``sandbox`` is the trusted side's handle on these processes, ``launch`` how
they are started, ``leftovers`` what they leave behind.
"""
