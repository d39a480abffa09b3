def f():
    if x:
        y()
