def b():
    return 1

class X:
  def b():
    return 1
