def f():
    if x:
        z()
