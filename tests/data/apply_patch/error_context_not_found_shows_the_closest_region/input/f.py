def main():
    run(1)
