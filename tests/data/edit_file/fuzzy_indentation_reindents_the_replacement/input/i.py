class A:
    def go(self):
        if ok:
            run()
