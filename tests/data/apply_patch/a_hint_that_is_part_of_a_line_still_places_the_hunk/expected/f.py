def helper():
    return 0

def main(argv):
    return 1
